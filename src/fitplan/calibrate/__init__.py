"""`fitplan calibrate`: measure this machine's GEMMs and collectives, write a GPU spec file.

Shell side, like fitplan.validate: torch is imported inside the functions that need it, so
`import fitplan` never needs torch. fit.py (NumPy only) fits the GEMM curve; measure.py
times GEMMs and collectives with torch; runner.py resolves the model, measures, fits and
writes the [gpu] table that --gpu-spec (or --spec) loads.
"""
