"""The PyTorch GPT a user would write, shared by the CPU and GPU benchmarks (issue 17).

nanoGPT-style GPT-2: pre-LayerNorm blocks of nn.Linear layers, causal attention through
F.scaled_dot_product_attention(is_causal=True), tanh GeLU, learned positions, the output
layer tied to the token embedding, N(0, 0.02) weights; AdamW (fused where the device has
it, else foreach) and gradient clipping at 1.0. Both benchmarks import this one
definition, so the CPU and GPU comparisons measure against the same model.
"""


def padded_vocab(vocab, tensor=1):
    """The engine pads the vocabulary to a multiple of 128 * tensor; so does the reference."""
    multiple = 128 * tensor
    return (vocab + multiple - 1) // multiple * multiple


def model_flops_per_step(layers, hidden, seq, vocab, batch):
    """Megatron's model FLOPs per iteration without recomputation (ARCHITECTURE.md)."""
    B, s, l, h, V = batch, seq, layers, hidden, padded_vocab(vocab)
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def build_model(torch, layers, hidden, heads, seq, vocab):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc, self.fc_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            B, S, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, S, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, S, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            V = padded_vocab(vocab)
            self.wte, self.wpe = nn.Embedding(V, hidden), nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.lnf = nn.LayerNorm(hidden)

        def forward(self, tokens, targets):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # tied output layer
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    model = Gpt()
    for p in model.parameters():  # GPT-2's N(0, 0.02), as the engine starts
        if p.dim() > 1:
            torch.nn.init.normal_(p, 0.0, 0.02)
    return model


def build_optimizer(torch, model, device):
    """AdamW as a user writes it: fused on CUDA, foreach (multi-tensor) on the CPU."""
    kwargs = {"fused": True} if device == "cuda" else {"foreach": True}
    return torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                             weight_decay=0.01, **kwargs)
