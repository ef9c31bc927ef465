"""Adapters that give agents built with other frameworks visus's eyes.

Each framework is imported only inside its own module, installed by its extra:

* :mod:`visus.integrations.pydantic_ai` (``pip install -e '.[pydantic-ai]'`` in the checkout)
* :mod:`visus.integrations.openai_agents` (``pip install -e '.[openai-agents]'`` in the checkout)
* :mod:`visus.integrations.langchain` (``pip install -e '.[langchain]'`` in the checkout)

:mod:`visus.integrations.core` holds what they share (tools, fitting, retention),
``visus.integrations._common`` the steps each adapter spells in its framework's types,
:mod:`visus.integrations.items` OpenAI-style image items and the Agents SDK session.
"""
