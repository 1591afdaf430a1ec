"""One module per CLI verb; each keeps to parsing options and printing, the logic lives elsewhere."""
