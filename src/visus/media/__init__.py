"""Decode, render and fit any source into an image a model takes."""
