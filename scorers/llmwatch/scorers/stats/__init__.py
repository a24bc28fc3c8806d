"""Statistics: two-sample tests, stratified tests, agreement between raters. Pure functions over arrays."""
