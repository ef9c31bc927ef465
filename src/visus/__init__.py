"""visus gives LLM agents eyes.

An agent can ``read`` a file as text or ``view`` it as pixels; whatever it views
reaches the model as a real image block on every provider wire. See README.md and
the modules named in DESIGN.md for the pipeline.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
