"""Reports for people: text tables and self-contained HTML pages with plots."""
