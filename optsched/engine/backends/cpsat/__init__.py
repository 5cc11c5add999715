"""OR-Tools CP-SAT backend."""
