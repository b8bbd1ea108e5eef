# The two commands a new user runs on a fresh Debian machine. Each installs
# what it needs first (scripts/install.sh), then runs.
.PHONY: demo test install

demo:
	scripts/install.sh spark
	python3 -m zkcoord.cli demo

test:
	scripts/install.sh test,spark
	python3 -m pytest
