"""Example applications, installed with the package so the demo and users can
run them by module name (``python -m zkcoord.examples.pipeline``).

Layer 9 of the map in docs/DESIGN.md: an example may import every package
below it, as an application would; nothing imports it.
"""
