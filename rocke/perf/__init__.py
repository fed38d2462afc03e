"""Performance you can see: rocke's model of MI300X time from exact emulator counters.

`model_time(profile)` (model.py) turns a `rocke.emu.launch(..., profile=True)` report's
counters into a modelled MI300X time, its speed-of-light bound and the binding resource. Every
figure it prints is labelled "modelled MI300X time": there is no MI300X here.
"""
from .model import LABEL, Modelled, matrix_ceiling_us, model_time

__all__ = ["model_time", "matrix_ceiling_us", "Modelled", "LABEL"]
