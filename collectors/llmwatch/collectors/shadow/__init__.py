"""Shadow evaluation: mirroring sampled live calls to candidate versions."""
