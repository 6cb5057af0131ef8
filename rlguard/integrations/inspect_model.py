"""An Inspect model provider, ``rlguard/NAME``: each sample's model turns go through its own
episode's recording model proxy, so an Inspect eval on rlguard sandboxes produces training data.

Inspect builds one model for a whole eval and runs samples concurrently, while the proxy is per
episode (``/v1/episodes/{id}/model/v1``, the episode's agent token as key). So the provider finds
the episode of the sample it generates for (the sample's ``rlguard`` sandbox) and hands the turn
to Inspect's own OpenAI-compatible provider (``openai-api``) pointed at that episode's proxy:
the requests are exactly those Inspect sends to any vLLM-style server.

``inspect eval task.py --model rlguard/tiny`` (``NAME`` is sent as the model name; the gateway's
policy server decides what serves it). A sample without an rlguard sandbox is an error.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, get_model, modelapi
from inspect_ai.tool import ToolChoice, ToolInfo
from inspect_ai.util import sandbox

from rlguard.errors import RlguardError
from rlguard.integrations.inspect_sandbox import RlguardSandboxEnvironment


class RlguardModelAPI(ModelAPI):
    """Inspect's ``openai-api`` provider, one per episode, at the episode's model proxy."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig | None = None,
        **model_args: Any,
    ) -> None:
        self._config = config or GenerateConfig()
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=self._config)
        self._model_args = model_args
        self._apis: dict[str, tuple[Any, ModelAPI]] = {}  # episode id -> (its Episode, its provider)

    def _episode(self) -> Any:
        try:
            environment = sandbox().as_type(RlguardSandboxEnvironment)
        except Exception as exc:
            raise RlguardError(
                f"the rlguard/{self.model_name} model serves samples that run in an rlguard sandbox "
                f'(sandbox="rlguard"): {exc}'
            ) from exc
        return environment.episode

    async def _api_for(self, episode: Any) -> ModelAPI:
        handle = await episode.start()
        known = self._apis.get(handle.episode_id)
        if known is not None:
            return known[1]
        for ended in [key for key, (other, _) in self._apis.items() if other.ended]:
            await self._apis.pop(ended)[1].aclose()
        url = f"{episode.client.base_url}/v1/episodes/{handle.episode_id}/model/v1"
        api = get_model(
            f"openai-api/rlguard/{self.model_name}",
            base_url=url,
            api_key=handle.agent_token,
            config=self._config,
            memoize=False,
            **self._model_args,
        ).api
        self._apis[handle.episode_id] = (episode, api)
        return api

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> Any:
        api = await self._api_for(self._episode())
        return await api.generate(input=input, tools=tools, tool_choice=tool_choice, config=config)

    async def aclose(self) -> None:
        for _, api in self._apis.values():
            await api.aclose()
        self._apis.clear()


@modelapi(name="rlguard")
def rlguard_model() -> type[ModelAPI]:
    return RlguardModelAPI
