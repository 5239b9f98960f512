"""``bh``: the operators' command line of brainhands."""
