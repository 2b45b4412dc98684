"""Shortcuts that find networks fast and never decide infeasibility: witness transfer,
random-front pools, grid and plane walks, the label sweep.  Every network they propose is
certified before it is reported (imports the question, encode and solvers layers)."""
