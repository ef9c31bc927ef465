"""Adapters that give agents built with other frameworks visus's eyes.

Each framework is imported only inside its own module, installed by its extra:

* :mod:`visus.integrations.pydantic_ai` (``pip install -e '.[pydantic-ai]'`` in the checkout)
* :mod:`visus.integrations.openai_agents` (``pip install -e '.[openai-agents]'`` in the checkout)
* :mod:`visus.integrations.langchain` (``pip install -e '.[langchain]'`` in the checkout)

:mod:`visus.integrations.core` holds what they share (tools, fitting, retention, the
:class:`~visus.integrations.core.Integration` each adapter is), its values in
:mod:`visus.integrations.values`; :mod:`visus.integrations.window` one request's view
of a framework history (turns, each tool image's fate, hoisting, stale reasoning, cache
breakpoints), :mod:`visus.integrations.reasoning` the thinking and effort a request
goes with. No framework is imported by those, nor by the two that read a framework's
own dicts: :mod:`visus.integrations.items` (the Agents SDK's Responses items and
session) and :mod:`visus.integrations.blocks` (LangChain's content blocks).
"""
