"""Backends: every model the protocols call, local or remote, behind one interface (``base.Backend``).

- ``base``: the interface (``chat``, ``achat``, ``batch``), declared ``Capabilities`` and the shared base class;
- ``registry``: ``"provider/model"`` strings resolved to backends (``resolve``), the one place providers are spelled;
- ``openai``: any OpenAI-compatible chat endpoint through the ``openai`` SDK: providers (configuration), the chat
  semantics (capabilities, the schema's form); ``openai_transport``: the way there (clients, time, retries,
  requests in flight, errors translated);
- ``fleet``: one model on several OpenAI-compatible servers, a batch's jobs spread over them;
- ``ollama``: a model an Ollama server serves;
- ``wire``: what comes back over the wire, checked before anything reads it;
- ``address``: whether a model runs on this device, decided from its address;
- ``embeddings``: sentence embeddings (a text's meaning as a vector) for the library's meaning search;
- ``model_files``, ``hub``: where local model files come from, and GGUF pulls from the Hugging Face Hub;
- ``inventory``: what ``minions models`` lists;
- ``settings``: numbers read from the environment, checked the same way;
- ``scripted``: a scriptable backend for tests of protocol logic.

Subpackages: ``llamacpp`` (the embedded engine), ``pytorch`` (the ``transformers/`` provider) and
``speculation`` (speculative decoding for both engines).
"""
