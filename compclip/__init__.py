"""Shared pieces of the compclip packages that belong to none of them: the CLI convention (`compclip.cli`)."""
