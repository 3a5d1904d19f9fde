"""Feature taps: the paper's layer rule, and that the features are the tapped layers' outputs."""
import pytest
import torch

from dflash_lite.decoding.target import context_features, tapped_layer_ids


@pytest.mark.parametrize("layers,taps,expected", [
    (8, 5, [1, 2, 3, 4, 5]),          # the shipped target
    (28, 5, [1, 7, 13, 19, 25]),      # Qwen3-0.6B / 1.7B
    (36, 5, [1, 9, 17, 25, 33]),      # Qwen3-4B / 8B
    (36, 3, [1, 17, 33]),
    (32, 5, [1, 8, 15, 22, 29]),      # Llama-3.1-8B (rounding of 7.5 etc.)
    (6, 5, [1, 2, 3]),                # capped at the N-3 layers of the range
    (8, 1, [4]),
])
def test_layer_rule_spreads_from_second_to_third_from_last(layers, taps, expected):
    ids = tapped_layer_ids(layers, taps)
    assert ids == expected
    assert ids[0] >= 1 and ids[-1] <= max(1, layers - 3) and ids == sorted(set(ids))


def test_layer_rule_rejects_impossible_requests():
    with pytest.raises(ValueError):
        tapped_layer_ids(1)
    with pytest.raises(ValueError):
        tapped_layer_ids(8, 0)


@pytest.mark.parametrize("which", ["tiny", "llama"])
def test_features_are_the_tapped_layer_outputs_concatenated(tiny, random_llama, which):
    from dflash_lite import load_pretrained

    model, tokenizer = tiny if which == "tiny" else load_pretrained(random_llama)
    ids = tokenizer("def f(x):\n    return x", return_tensors="pt").input_ids
    layer_ids = tapped_layer_ids(model.config.num_hidden_layers, 3)
    captured = {}
    hooks = [model.model.layers[i].register_forward_hook(
        lambda module, args, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i in layer_ids]
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    for h in hooks:
        h.remove()
    features = context_features(out.hidden_states, layer_ids)
    hidden = model.config.hidden_size
    assert len(layer_ids) == 3 and features.shape == (1, ids.shape[1], 3 * hidden)
    for j, layer in enumerate(layer_ids):
        torch.testing.assert_close(features[..., j * hidden:(j + 1) * hidden], captured[layer])
