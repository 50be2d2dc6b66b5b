"""The LLM side of the graphs: Claude (or another LangChain chat model) as analyst, verifier and
synthesizer agents over the typed tools of ``tools/llm_tools.py``, with every number traced."""
