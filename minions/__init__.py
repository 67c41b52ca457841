"""minions: a small on-device model and a frontier cloud model working together on long documents."""
