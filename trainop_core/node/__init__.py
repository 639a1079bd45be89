"""Process nodes: what makes pods really run on the try-it cluster."""
