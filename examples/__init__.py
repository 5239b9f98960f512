"""Worked examples of brainhands, with the small real services they talk to."""
