"""What a run shows and writes: the console, the JSON report, JUnit XML."""
