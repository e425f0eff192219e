"""Compositional evaluation: VISLA, ARO, BiVLC, SugarCrepe, SugarCrepe++ behind one scorer interface."""
