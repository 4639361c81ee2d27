"""The base every other layer imports: errors, the state directory, signals, deadlines."""
