"""Example applications, installed with the package so the demo and users can
run them by module name (``python -m zkcoord.examples.pipeline``)."""
