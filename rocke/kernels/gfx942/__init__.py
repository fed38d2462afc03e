"""gfx942 (CDNA3, MI300X) kernel families."""
