"""The groups a coordinator holds, and the topics their members may subscribe to.

Owns the table of groups by name (created on first sight, dropped only when
forgotten) and the partition count of each topic as the topic watches last
said. The groups themselves (group.py) are the model every part reads and
moves through their own transitions; which part changes what of a group is
said in each part's docstring.
"""

from __future__ import annotations

from typing import Optional

from zkcoord.coordinator.group import Group


class GroupTable:
    def __init__(self) -> None:
        self.by_name: dict[str, Group] = {}
        self.partitions: dict[str, int] = {}  # topic -> partition count, kept by the topic watches

    def get(self, name: str) -> Optional[Group]:
        return self.by_name.get(name)

    def named(self, name: str) -> Group:
        """The group ``name``, made empty if it is new (Kafka's handleNewGroup)."""
        group = self.by_name.get(name)
        if group is None:
            group = self.by_name[name] = Group(name)
        return group

    def drop(self, group: Group) -> None:
        """Forget ``group`` (unless a new one holds its name already)."""
        if self.by_name.get(group.name) is group:
            del self.by_name[group.name]

    def __iter__(self):
        return iter(list(self.by_name.values()))
