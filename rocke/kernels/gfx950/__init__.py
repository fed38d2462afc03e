"""Kernels for gfx950 (CDNA4, MI355X): families that use what gfx942 lacks (wide-K MFMA, 160 KiB LDS)."""
