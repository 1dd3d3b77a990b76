"""The OpenAI server's non-generation surface and its failure shapes, over a live server on
127.0.0.1 driven by the real openai client (and raw HTTP where the client cannot go).

Specification: the utility routes answer as vLLM's do; /metrics speaks Prometheus with
vLLM's series names; --api-key guards every route but /health and /ping; every failure is
an OpenAI error body with the right status (400 for bad bodies and over-long prompts naming
both lengths, 401, 404 for unknown models and routes); a client that leaves mid-stream
gets its request aborted and its KV blocks freed.
"""

from __future__ import annotations

import http.client
import json
import socket

import httpx2 as httpx
import openai
import pytest
from server_helpers import MODEL_NAME, wait_until

from vllm_tvm import __version__

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_models_lists_the_served_name_and_length(server):
    [model] = server.client().models.list().data
    assert model.id == MODEL_NAME
    assert model.model_extra["max_model_len"] == server.ctx.max_model_len


def test_model_card_names_the_served_model_never_its_path(server, server_farm):
    card = server.client().models.retrieve(MODEL_NAME)
    assert (card.id, card.object, card.model_extra["root"]) == (MODEL_NAME, "model", MODEL_NAME)
    listing = httpx.get(server.url + "/v1/models")
    assert listing.json()["data"][0] == httpx.get(f"{server.url}/v1/models/{MODEL_NAME}").json()
    assert str(server_farm.model_dir) not in listing.text
    assert server_farm.model_dir.name not in listing.text


def test_model_card_of_an_unknown_id_is_a_404(server):
    with pytest.raises(openai.NotFoundError) as caught:
        server.client().models.retrieve("no-such-model")
    assert caught.value.body["param"] == "model"
    assert "no-such-model" in caught.value.body["message"]


def test_every_served_name_has_a_model_card(server_farm):
    server = server_farm.server(served_model_name=["first", "org/second"])
    client = server.client()
    assert [model.id for model in client.models.list().data] == ["first", "org/second"]
    card = client.models.retrieve("org/second")
    assert (card.id, card.model_extra["root"]) == ("org/second", "first")


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/health"), ("HEAD", "/health"), ("GET", "/ping"), ("POST", "/ping")],
)
def test_liveness_routes_answer_200(server, method, path):
    assert httpx.request(method, server.url + path).status_code == 200


def test_version_reports_the_package_version(server):
    assert httpx.get(server.url + "/version").json() == {"version": __version__}


def test_server_info_carries_config_and_environment(server):
    info = httpx.get(server.url + "/server_info").json()
    assert set(info) == {"vllm_config", "vllm_env", "system_env"}
    assert info["vllm_config"]["max_model_len"] == server.ctx.max_model_len
    assert info["vllm_config"]["cache"]["block_size"] == 32


def test_server_info_masks_secrets_in_the_environment(server, monkeypatch):
    secrets = {
        "VLLM_API_KEY": "sk-very-secret",
        "VLLM_HF_TOKEN": "hf-token-value",
        "VLLM_DB_PASSWORD": "hunter2",
        "TVM_SECRET_SAUCE": "ketchup",
    }
    for name, value in {**secrets, "VLLM_TVM_PLAIN": "shown"}.items():
        monkeypatch.setenv(name, value)
    response = httpx.get(server.url + "/server_info")
    env = response.json()["vllm_env"]
    assert {name: env[name] for name in secrets} == dict.fromkeys(secrets, "<hidden>")
    assert env["VLLM_TVM_PLAIN"] == "shown"
    assert not any(value in response.text for value in secrets.values())


def test_request_log_cuts_every_parameter_to_max_log_len(server_farm, caplog):
    server = server_farm.server(enable_log_requests=True, max_log_len=40)
    stops = [f"stop-word-{i}" for i in range(2000)]
    with caplog.at_level("INFO", logger="vllm_tvm.server"):
        server.client().completions.create(
            model=MODEL_NAME, prompt="Hello " * 200, max_tokens=1, stop=stops
        )
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]
    assert f"stop={repr(stops)[:40]}...({len(repr(stops)) - 40} more)," in line
    assert "max_tokens=1" in line
    assert len(line) < 40 * 40


def test_reset_prefix_cache_succeeds(server):
    response = httpx.post(server.url + "/reset_prefix_cache")
    assert response.json() == {"success": True}


def test_metrics_expose_vllm_series_in_prometheus_text(server):
    server.client().completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=2)
    response = httpx.get(server.url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    names = {
        line.split("{")[0].split(" ")[0]
        for line in response.text.splitlines()
        if line and not line.startswith("#")
    }
    expected = {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_per_output_token_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:cache_config_info",
    }
    assert expected <= names
    assert f'model_name="{MODEL_NAME}"' in response.text


def test_metrics_count_generated_tokens(server):
    def generated() -> float:
        for line in httpx.get(server.url + "/metrics").text.splitlines():
            if line.startswith("vllm:generation_tokens_total"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("no vllm:generation_tokens_total")

    before = generated()
    server.client().completions.create(
        model=MODEL_NAME, prompt="Hello", max_tokens=5, extra_body={"ignore_eos": True}
    )
    assert generated() == before + 5


def test_disabled_metrics_are_a_404(server_farm):
    server = server_farm.server(enable_metrics=False)
    assert httpx.get(server.url + "/metrics").status_code == 404


def test_tokenize_and_detokenize_round_trip(server):
    text = "The quick brown fox jumps over the lazy dog."
    body = {"prompt": text, "add_special_tokens": False}
    tokens = httpx.post(server.url + "/tokenize", json=body).json()
    assert tokens["count"] == len(tokens["tokens"]) > 0
    assert tokens["max_model_len"] == server.ctx.max_model_len
    back = httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert back == {"prompt": text}


def test_tokenize_agrees_with_the_tokenizers_library(server):
    from tokenizers import Tokenizer

    oracle = Tokenizer.from_file(str(server.ctx.config.engine.model) + "/tokenizer.json")
    text = "Paged attention keeps keys and values in blocks."
    body = {"prompt": text, "add_special_tokens": False, "return_token_strs": True}
    tokens = httpx.post(server.url + "/tokenize", json=body).json()
    encoding = oracle.encode(text, add_special_tokens=False)
    assert tokens["tokens"] == encoding.ids
    assert tokens["token_strs"] == encoding.tokens


def test_tokenize_renders_chat_messages_with_the_template(server):
    body = {"messages": [{"role": "user", "content": "hi there"}]}
    tokens = httpx.post(server.url + "/tokenize", json=body).json()
    back = httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert back["prompt"] == "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------------------- authentication


def test_api_key_is_required_on_api_routes(server_farm):
    server = server_farm.server(api_key="sesame")
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="wrong").models.list()
    for path in ("/v1/models", "/metrics", "/version", "/server_info"):
        response = httpx.get(server.url + path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == 401


def test_api_key_opens_the_api(server_farm):
    server = server_farm.server(api_key="sesame")
    assert server.client(api_key="sesame").models.list().data[0].id == MODEL_NAME


def test_liveness_routes_need_no_api_key(server_farm):
    server = server_farm.server(api_key="sesame")
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.post(server.url + "/ping").status_code == 200


# ------------------------------------------------------------------------------------ errors


def test_over_long_prompt_is_a_400_naming_both_lengths(server):
    limit = server.ctx.max_model_len
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model=MODEL_NAME, prompt=[5] * (limit + 3))
    message = caught.value.body["message"]
    assert str(limit + 3) in message and str(limit) in message


def test_malformed_json_is_a_400(server):
    response = httpx.post(
        server.url + "/v1/completions",
        content=b'{"model": "tiny-chat", "prompt": ',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "BadRequestError"


def test_wrong_field_type_is_a_400_naming_the_field(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model=MODEL_NAME, prompt="hi", max_tokens="many")  # type: ignore[arg-type]
    assert "max_tokens" in caught.value.body["message"]


def test_missing_messages_is_a_400(server):
    response = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL_NAME})
    assert response.status_code == 400
    assert "messages" in response.json()["error"]["message"]


def test_out_of_range_sampling_value_is_a_400_naming_it(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model=MODEL_NAME, prompt="hi", top_p=1.5)
    assert "top_p" in caught.value.body["message"]


def test_out_of_vocabulary_prompt_token_is_a_400(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model=MODEL_NAME, prompt=[1, 99999])
    assert "99999" in caught.value.body["message"]


def test_unknown_model_is_a_404(server):
    with pytest.raises(openai.NotFoundError) as caught:
        server.client().completions.create(model="gpt-9", prompt="hi")
    assert "gpt-9" in caught.value.body["message"]


def test_unknown_route_is_a_404_with_an_openai_body(server):
    response = httpx.get(server.url + "/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == 404


def test_invalid_json_schema_is_a_400(server):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}
    with pytest.raises(openai.BadRequestError):
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], response_format=bad
        )


def test_two_output_constraints_are_a_400(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(
            model=MODEL_NAME,
            prompt="hi",
            extra_body={"guided_regex": "a+", "structured_outputs": {"choice": ["x"]}},
        )
    assert "one output constraint" in caught.value.body["message"]


# -------------------------------------------------------------------------------- disconnect


def _raw_stream_request(port: int, body: dict) -> socket.socket:
    """Send a streaming request on a raw socket and read until the first event arrives."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request(
        "POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"}
    )
    response = connection.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"data: ")
    return connection


def test_client_disconnect_mid_stream_aborts_and_frees_blocks(server):
    engine = server.ctx.engine.engine
    body = {
        "model": MODEL_NAME,
        "prompt": "Once upon a time",
        "max_tokens": 1500,
        "stream": True,
        "ignore_eos": True,
    }
    connection = _raw_stream_request(server.port, body)
    assert engine.block_manager.num_used_blocks > 0
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    assert wait_until(lambda: engine.block_manager.num_used_blocks == 0)
    assert wait_until(lambda: not engine.has_unfinished)
    stats = server.ctx.engine.stats()
    assert stats.request_success["abort"] >= 1


def test_client_disconnect_during_a_json_request_aborts_it(server):
    engine = server.ctx.engine.engine
    before = server.ctx.engine.stats().request_success["abort"]
    body = {"model": MODEL_NAME, "prompt": "Once", "max_tokens": 1500, "ignore_eos": True}
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request(
        "POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"}
    )
    assert wait_until(lambda: engine.block_manager.num_used_blocks > 0)
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    assert wait_until(lambda: server.ctx.engine.stats().request_success["abort"] > before)
    assert wait_until(lambda: engine.block_manager.num_used_blocks == 0)


def test_request_whose_masks_leave_no_token_is_a_400(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(
            model=MODEL_NAME,
            prompt="Hello",
            extra_body={"guided_choice": ["ok"], "min_tokens": 5},
        )
    assert "no token left" in caught.value.body["message"]


# ------------------------------------------------------------------------------ server flags


def _rendered(server, messages, **extra) -> str:
    tokens = httpx.post(server.url + "/tokenize", json={"messages": messages, **extra}).json()
    return httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()[
        "prompt"
    ]


def test_chat_template_flag_replaces_the_checkpoints(server_farm, tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}")
    server = server_farm.server(chat_template=str(path))
    assert _rendered(server, [{"role": "user", "content": "hi"}]) == "[user] hi"


def test_enable_thinking_flag_reaches_the_template(server_farm):
    template = "thinking={{ enable_thinking }}"
    on = server_farm.server(chat_template=template, enable_thinking=True)
    assert _rendered(on, [{"role": "user", "content": "x"}]) == "thinking=True"
    overridden = _rendered(
        on, [{"role": "user", "content": "x"}], chat_template_kwargs={"enable_thinking": False}
    )
    assert overridden == "thinking=False"


def test_request_and_output_logging_cut_to_max_log_len(server_farm, caplog):
    server = server_farm.server(enable_log_requests=True, enable_log_outputs=True, max_log_len=7)
    with caplog.at_level("INFO", logger="vllm_tvm.server"):
        server.client().completions.create(
            model=MODEL_NAME, prompt="Paged attention keeps keys", max_tokens=2
        )
    messages = [r.getMessage() for r in caplog.records if r.name == "vllm_tvm.server"]
    assert any("'Paged a'" in m and "Paged at" not in m for m in messages)
    assert any("finished" in m for m in messages)


def test_requests_are_not_logged_when_disabled(server, caplog):
    with caplog.at_level("INFO", logger="vllm_tvm.server"):
        server.client().completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=1)
    assert not [r for r in caplog.records if r.name == "vllm_tvm.server"]
