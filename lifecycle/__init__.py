"""The operation lifecycle shared by the Brain's in-process calls and the Hands."""
