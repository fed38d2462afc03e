"""Placeholder until the CLI lands (issue 2, item 7)."""
def main():
    raise SystemExit("rocke CLI not built yet")
