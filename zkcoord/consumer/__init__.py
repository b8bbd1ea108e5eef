"""The thin consumer and its group membership."""
