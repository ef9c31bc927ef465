"""The model catalog and image-token formulas."""
