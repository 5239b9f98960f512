"""greeter: a Brain plugin of one's own, deployed into brainhands' services.

``greeter.tasks:plugin`` registers the ``greet`` task kind and its in-process tool
``shout``; the sandboxed tool ``letter_count`` is an image of its own (``tool/``).
"""
