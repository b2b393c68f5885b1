"""roam.zoo: BERT-base and the GPT-2 presets (standard configurations, checked by parameter
count against the published models), causal masking, tied LM heads, and a zoo capture."""

import pytest
import torch

import roam
from roam import zoo
from roam.capture.fake import new_fake_mode

# Parameter counts of the released checkpoints (Hugging Face GPT2LMHeadModel with the LM head
# tied to wte; BertForMaskedLM: BERT-base without pooler plus the MLM head).
PARAMS = {"gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080,
          "gpt2-xl": 1_557_611_200, "bert-base": 109_514_298}


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_preset_parameter_counts_without_allocating(name):
    with new_fake_mode():  # building GPT-2 XL for real would take 6 GB
        model = zoo.build(name)
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]
    assert all(type(p).__name__ == "FakeTensor" for p in model.parameters())


def test_names_and_configs():
    assert zoo.model_names() == ["bert-base", "gpt2", "gpt2-large", "gpt2-medium", "gpt2-xl"]
    xl = zoo.MODELS["gpt2-xl"].config
    assert (xl.n_layer, xl.n_head, xl.n_embd, xl.n_positions, xl.vocab_size) == \
        (48, 25, 1600, 1024, 50257)
    bert = zoo.MODELS["bert-base"]
    assert bert.seq_len == 128
    assert (bert.config.num_hidden_layers, bert.config.hidden_size,
            bert.config.num_attention_heads) == (12, 768, 12)
    with pytest.raises(KeyError):
        zoo.build("gpt3")


TINY_GPT = zoo.GPT2Config(vocab_size=40, n_positions=12, n_embd=8, n_layer=2, n_head=2)
TINY_BERT = zoo.BertConfig(vocab_size=200, hidden_size=8, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=16,
                           max_position_embeddings=16)


def test_gpt2_is_causal_and_tied():
    torch.manual_seed(0)
    model = zoo.GPT2(TINY_GPT).eval()
    ids = torch.randint(0, 40, (2, 12))
    out = model(ids)
    assert out.shape == (2, 12, 40)
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 40
    out2 = model(changed)
    assert torch.equal(out[:, :7], out2[:, :7])  # earlier positions never see later tokens
    assert not torch.allclose(out[:, 7:], out2[:, 7:])
    # no separate LM-head weight: the logits are x @ wte.weight^T
    names = [n for n, _ in model.named_parameters()]
    assert "wte.weight" in names and not any("lm_head" in n for n in names)
    assert model.future.dtype == torch.bool and model.future.shape == (12, 12)
    assert torch.equal(model.future, torch.ones(12, 12, dtype=torch.bool).triu(1))


def test_bert_attends_both_ways_and_mlm_batch():
    torch.manual_seed(0)
    model = zoo.Bert(TINY_BERT).eval()
    ids = torch.randint(0, 200, (2, 10))
    out = model(ids)
    assert out.shape == (2, 10, 200)
    changed = ids.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 200
    assert not torch.allclose(model(changed)[:, 0], out[:, 0])  # bidirectional
    g = torch.Generator().manual_seed(0)
    ids, labels = zoo.example_batch("bert-base", 4, 128, generator=g)
    masked = labels != -100
    assert ids.shape == labels.shape == (4, 128)
    assert 0.1 < masked.float().mean().item() < 0.25
    assert torch.all(ids[masked] == 103) and torch.all(labels[masked] >= 1000)
    ids, labels = zoo.example_batch("gpt2", 2, 16, generator=g)
    assert torch.equal(ids[:, 1:], labels[:, :-1])  # labels are the next tokens


def test_tied_weight_gets_both_gradients_in_the_capture():
    """The token embedding is read twice (lookup and LM head): the captured backward sums
    both gradients into one update of the single ``wte.weight`` parameter."""
    g = torch.Generator().manual_seed(0)
    batch = zoo.example_batch("gpt2", 2, 12, generator=g, config=TINY_GPT)
    torch.manual_seed(0)
    model = zoo.GPT2(TINY_GPT)
    res = roam.capture(model, torch.optim.Adam(model.parameters(), foreach=False), zoo.lm_loss,
                       batch, fake=True, input_names=["input_ids", "labels"])
    gr = res.graph
    by_id = {t["id"]: t for t in gr["tensors"]}
    (wte,) = [t["id"] for t in gr["tensors"] if t.get("name") == "wte.weight"]
    (emb_bwd,) = [op for op in gr["ops"]
                  if op["target"] == "aten.embedding_dense_backward.default"
                  and by_id[op["outputs"][0]]["shape"] == [40, 8]]  # wte (wpe is [12, 8])
    upd = [op for op in gr["ops"] if op["target"] == "aten.addcdiv_.default"
           and op["inputs"][0] == wte]
    assert len(upd) == 1
    # the gradient of the lookup is added to the LM head's gradient before the update
    adds = [op for op in gr["ops"] if op["phase"] == "backward"
            and emb_bwd["outputs"][0] in op["inputs"] and op["target"] == "aten.add.Tensor"]
    assert len(adds) == 1 and by_id[adds[0]["outputs"][0]]["shape"] == [40, 8]
    assert [t["name"] for t in gr["tensors"] if t.get("role") == "input"] == [
        "input_ids", "labels"]
