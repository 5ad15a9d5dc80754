"""Programs for the oracle tests: every assigned tensor is compared with real torch."""

FACTORIES = """
import torch
z = torch.zeros(2, 3)
o = torch.ones((4,))
e = torch.empty(3, 2, dtype=torch.float16)
r = torch.randn(2, 3, 4)
u = torch.rand(size=(5, 1))
f = torch.full((2, 2), 3.0)
ar = torch.arange(10)
ar2 = torch.arange(0, 10, 2, dtype=torch.float32)
ls = torch.linspace(0, 1, 5)
ey = torch.eye(3)
zl = torch.zeros_like(r)
ol = torch.ones_like(r, dtype=torch.float64)
ri = torch.randint(0, 10, (3, 4))
lit = torch.tensor([[1, 2], [3, 4]])
litf = torch.tensor([1.0, 2.0], dtype=torch.float64)
es = torch.empty_strided((2, 3), (1, 2))
dev = torch.zeros(3, device="cpu")
rg = torch.randn(3, requires_grad=True)
half = torch.ones(2, 2, dtype=torch.half)
lng = torch.zeros(4, dtype=torch.long)
B, C = 4, 8
sized = torch.randn(B * 2, C // 2)
perm = torch.randperm(6)
"""

INDEXING = """
import torch
a = torch.arange(24.0).reshape(4, 6)
i0 = a[1]
i1 = a[-1]
c1 = a[:, 1]
s1 = a[1:3]
s2 = a[::2]
s3 = a[:, 1:5:2]
s4 = a[1:, 1:3]
s5 = a[-2:, -3:-1]
n1 = a[None]
n2 = a[:, None, :]
e1 = a[..., 1]
e2 = a[..., None]
mix = a[1, None, 2:]
clip = a[1:100]
scalar = a[2, 3]
x = torch.randn(2, 3, 4)
x1 = x[0, 1]
x2 = x[:, :, ::3]
x3 = x[1:, ..., :2]
idx = torch.tensor([0, 2])
adv = a[idx]
"""

VIEW_OPS = """
import torch
a = torch.randn(3, 4)
x = torch.randn(2, 3, 4)
tT = a.T
mT = x.mT
t2 = a.t()
tr = x.transpose(0, 1)
tr2 = x.transpose(-1, -2)
pm = x.permute(2, 0, 1)
md = x.movedim(0, 2)
us = a.unsqueeze(0)
us2 = a.unsqueeze(-1)
sq = torch.randn(1, 3, 1).squeeze()
sq1 = torch.randn(2, 1, 3).squeeze(1)
fl = x.flatten()
fl1 = x.flatten(1)
uf = a.unflatten(1, (2, 2))
v1 = a.view(-1)
v2 = x.view(2, -1)
va = a.view_as(torch.empty(12))
rs = a.reshape(2, 6)
rs_copy = tr.reshape(6, 4)
ra = a.reshape_as(torch.empty(6, 2))
ex = torch.randn(3, 1).expand(3, 5)
ex2 = torch.randn(4).expand(2, 3, 4)
exa = torch.randn(1, 4).expand_as(a)
nw = x.narrow(2, 1, 2)
sl = x.select(1, 2)
dg = a.diagonal()
dg1 = a.diagonal(offset=1)
un = torch.arange(8.0).unfold(0, 3, 2)
perm_view = x.permute(2, 0, 1).view(4, 6)
tflat = a.t().flatten()
tc = a.t().contiguous()
cl = x.permute(0, 2, 1).clone()
"""

TUPLES = """
import torch
a = torch.arange(12.0).reshape(3, 4)
c0, c1 = a.chunk(2, dim=1)
r0, r1, r2 = a.chunk(3)
s0, s1 = a.split(2)
p0, p1, p2 = a.split([1, 2, 1], dim=1)
u0, u1, u2 = a.unbind(0)
w0, w1, w2, w3 = a.unbind(1)
mx, ix = a.max(dim=1)
q, k, v = torch.randn(2, 9).chunk(3, dim=1)
first = a.chunk(2, dim=1)[0]
"""

CASTS = """
import torch
x = torch.randn(2, 3, 4, 5)
cl = x.contiguous(memory_format=torch.channels_last)
back = cl.contiguous()
d = x.detach()
c = x.clone()
f16 = x.to(torch.float16)
f16b = x.half()
f64 = x.double()
i64 = x.long()
f32 = x.float()
same = x.to("cpu")
dt = x.to(dtype=torch.bfloat16)
b = x > 0
clk = cl.clone()
perm = x.permute(0, 2, 3, 1)
pc = perm.contiguous()
"""

ELEMENTWISE = """
import torch
a = torch.randn(3, 4)
b = torch.randn(4)
col = torch.randn(3, 1)
add = a + 1
mul = a * b
bc = col * b
ex = a.exp()
relu = torch.relu(a)
div = a / 2
neg = -a
pw = a ** 2
gt = a > 0
wh = torch.where(gt, a, torch.zeros(3, 4))
pt = a.t() + 1
pt2 = a.t() * a.t()
mix = a.t() + torch.ones(4, 3)
sg = torch.sigmoid(a)
cp = a.clamp(min=0)
sm = a.softmax(dim=-1)
lsm = torch.log_softmax(a, dim=1)
abs_ = a.abs()
"""

LINALG_REDUCE = """
import torch
a = torch.randn(3, 4)
b = torch.randn(4, 5)
bat = torch.randn(2, 3, 4)
bat2 = torch.randn(2, 4, 6)
mm = a @ b
mm2 = torch.matmul(a, b)
mm3 = a.mm(b)
bm = torch.bmm(bat, bat2)
bcast = bat @ b
ct = torch.cat([a, a], dim=0)
ct1 = torch.cat((a, a), dim=1)
st = torch.stack([a, a])
st1 = torch.stack([a, a], dim=2)
s = a.sum()
s0 = a.sum(0)
m1 = a.mean(1, keepdim=True)
am = a.amax(dim=0)
arg = a.argmax(dim=1)
nm = a.norm()
sd = bat.std(dim=-1)
pr = a.prod(1)
cs = a.cumsum(0)
"""

NN_MODULES = """
import torch
from torch import nn
import torch.nn.functional as F

x = torch.randn(2, 8)
img = torch.randn(2, 3, 16, 16)
seq = torch.randn(2, 4, 10)
vol = torch.randn(1, 3, 4, 8, 8)
lin = nn.Linear(8, 5)
y = lin(x)
conv1 = nn.Conv1d(4, 6, 3)
y1 = conv1(seq)
conv2 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
y2 = conv2(img)
conv3 = nn.Conv3d(3, 2, kernel_size=3)
y3 = conv3(vol)
bn = nn.BatchNorm2d(3)
yb = bn(img)
ln = nn.LayerNorm(8)
yl = ln(x)
emb = nn.Embedding(10, 4)
ye = emb(torch.tensor([[1, 2, 3]]))
mp = nn.MaxPool2d(2)
ym = mp(img)
ap = nn.AvgPool2d(2, stride=2)
ya = ap(img)
aap = nn.AdaptiveAvgPool2d((1, 1))
yaa = aap(img)
act = nn.ReLU()
yr = act(x)
gelu = nn.GELU()
yg = gelu(x)
drop = nn.Dropout(0.5)
yd = drop(x)
stack = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
ys = stack(x)
fl = F.linear(x, torch.randn(3, 8))
fc = F.conv2d(img, torch.randn(4, 3, 3, 3), padding=1)
fr = F.relu(x)
fs = F.softmax(x, dim=-1)
fmp = F.max_pool2d(img, 2)
fln = F.layer_norm(x, (8,))
fi = F.interpolate(img, scale_factor=2)
fp = F.pad(img, (1, 1))
"""

CHANNELS_LAST = """
import torch
from torch import nn
img = torch.randn(2, 3, 7, 7)
cl = img.contiguous(memory_format=torch.channels_last)
conv = nn.Conv2d(3, 6, 3)
out = conv(cl)
out2 = conv(img)
"""

VIDEO = """
import torch
from torch import nn
clips = torch.randn(4, 16, 3, 32, 32)
video = clips.permute(0, 2, 1, 3, 4)
conv = nn.Conv3d(3, 8, kernel_size=3, padding=1)
features = conv(video)
fixed = conv(video.contiguous())
"""

FUNCTIONS = """
import torch
from torch import nn

def make():
    base = torch.arange(12.0).reshape(3, 4)
    window = base[1:, 1:3]
    return window

def double(t):
    twice = t * 2
    return twice

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h = self.conv(x)
        pooled = h.mean(dim=(2, 3))
        logits = self.head(pooled)
        return logits

w = make()
d = double(torch.ones(5))
net = Net()
out = net(torch.randn(2, 3, 8, 8))
"""

CONTROL_FLOW = """
import torch
x = torch.randn(4, 6)
for i in range(3):
    y = x.t()
    z = y[1:]
if True:
    p = x.view(2, 12)
with torch.no_grad():
    w = torch.randn(3, requires_grad=True)
    n = w * 2
g = torch.randn(3, requires_grad=True)
h = g * 2
dd = h.detach()
squares = [t * t for t in x.unbind(0)]
k = squares[0]
total = torch.zeros(6)
total += x[0]
"""

SNIPPETS = {
    "factories": FACTORIES,
    "indexing": INDEXING,
    "view_ops": VIEW_OPS,
    "tuples": TUPLES,
    "casts": CASTS,
    "elementwise": ELEMENTWISE,
    "linalg_reduce": LINALG_REDUCE,
    "nn_modules": NN_MODULES,
    "channels_last": CHANNELS_LAST,
    "video": VIDEO,
    "functions": FUNCTIONS,
    "control_flow": CONTROL_FLOW,
}
