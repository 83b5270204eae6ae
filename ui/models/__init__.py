"""Qt item models over planner results."""
