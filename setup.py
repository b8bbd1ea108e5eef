"""Packaging for zkcoord. Versions are pinned where an API is young or where we
depend on library internals (protocol classes, construct's declarations)."""

from setuptools import find_packages, setup

setup(
    name="zkcoord",
    version="0.1.0",
    description="A ZooKeeper-elected, server-pushed consumer-group coordinator",
    python_requires=">=3.11",
    packages=find_packages(include=["zkcoord", "zkcoord.*"]),
    install_requires=[
        "kazoo==2.11.0",
        "gevent>=24.2",
        "construct==2.10.70",
        "kafka-python==3.0.12",
        "confluent-kafka==2.16.1",
        "crc32c>=2.4",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "hypothesis>=6.100",
        ],
        "spark": [
            "pyspark>=4.2",
            "pyarrow>=16",
        ],
    },
    entry_points={"console_scripts": ["zkcoord = zkcoord.cli:main"]},
)
