"""Engine actions: tasks the engine runs itself instead of sending a module (catalog.py names them all)."""
