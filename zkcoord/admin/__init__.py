"""Administration commands that act on ZooKeeper directly (topics)."""
