"""Adapters that give agents built with other frameworks visus's eyes.

Each framework is imported only inside its own module, installed by its extra:

* :mod:`visus.integrations.pydantic_ai` (``pip install 'visus[pydantic-ai]'``)
* :mod:`visus.integrations.openai_agents` (``pip install 'visus[openai-agents]'``)
* :mod:`visus.integrations.langchain` (``pip install 'visus[langchain]'``)

:mod:`visus.integrations.core` holds what they share (tools, fitting, retention).
"""
