"""eriklindernoren/PyTorch-GAN: image-to-image GANs (implementations/<model>/models.py).

Each entry follows its repository's training script (<model>.py) on tiny images and narrow
widths: the weights_init_normal initialisation, a generator step and a discriminator step with
the script's own losses, on two batches of distinct sizes, then sampling under torch.no_grad()
with the generator in eval mode (the scripts' sample_images()).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn


def _adam(*modules: nn.Module) -> torch.optim.Optimizer:
    params = [p for m in modules for p in m.parameters()]
    return torch.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))


def _munit(ns: dict[str, Any]) -> None:
    # munit.py: two encoder/decoder pairs, sampled style codes, MultiDiscriminator losses,
    # LambdaLR schedules; sample_images() decodes several random styles under no_grad.
    opts = {"dim": 8, "n_downsample": 2, "n_residual": 2, "style_dim": 4}
    enc1, enc2 = ns["Encoder"](**opts), ns["Encoder"](**opts)
    dec_opts = {"dim": 8, "n_upsample": 2, "n_residual": 2, "style_dim": 4}
    dec1, dec2 = ns["Decoder"](**dec_opts), ns["Decoder"](**dec_opts)
    d1, d2 = ns["MultiDiscriminator"](), ns["MultiDiscriminator"]()
    for m in (enc1, enc2, dec1, dec2, d1, d2):
        m.apply(ns["weights_init_normal"])
    optimizer_g = _adam(enc1, enc2, dec1, dec2)
    optimizer_d1, optimizer_d2 = _adam(d1), _adam(d2)
    schedule = ns["LambdaLR"](4, 0, 2)
    lr_g = torch.optim.lr_scheduler.LambdaLR(optimizer_g, lr_lambda=schedule.step)
    criterion_recon = nn.L1Loss()
    # The discriminators are fixed at 64..512 channels over three scales, and their instance
    # norms need more than one position at the coarsest one: 128x64 images are the least they
    # take. One full step at that size, then a second batch (smaller images) through the
    # encoder/decoder losses only, as with lambda_gan = 0.
    for batch, (h, w), with_gan in ((2, (128, 64), True), (3, (32, 48), False)):
        x1, x2 = torch.randn(batch, 3, h, w), torch.randn(batch, 3, h, w)
        style_1, style_2 = torch.randn(batch, 4, 1, 1), torch.randn(batch, 4, 1, 1)
        optimizer_g.zero_grad()
        c_code_1, s_code_1 = enc1(x1)
        c_code_2, s_code_2 = enc2(x2)
        x11, x22 = dec1(c_code_1, s_code_1), dec2(c_code_2, s_code_2)
        x21, x12 = dec1(c_code_2, style_1), dec2(c_code_1, style_2)
        c_code_21, s_code_21 = enc1(x21)
        c_code_12, s_code_12 = enc2(x12)
        x121, x212 = dec1(c_code_12, s_code_1), dec2(c_code_21, s_code_2)
        loss_g = (
            10 * criterion_recon(x11, x1)
            + 10 * criterion_recon(x22, x2)
            + criterion_recon(s_code_21, style_1)
            + criterion_recon(s_code_12, style_2)
            + criterion_recon(c_code_12, c_code_1.detach())
            + criterion_recon(c_code_21, c_code_2.detach())
            + criterion_recon(x121, x1)
            + criterion_recon(x212, x2)
        )
        if with_gan:
            loss_g = loss_g + d1.compute_loss(x21, 1) + d2.compute_loss(x12, 1)
        loss_g.backward()
        optimizer_g.step()
        lr_g.step()
        if not with_gan:
            continue
        optimizer_d1.zero_grad()
        loss_d1 = d1.compute_loss(x1, 1) + d1.compute_loss(x21.detach(), 0)
        loss_d1.backward()
        optimizer_d1.step()
        optimizer_d2.zero_grad()
        loss_d2 = d2.compute_loss(x2, 1) + d2.compute_loss(x12.detach(), 0)
        loss_d2.backward()
        optimizer_d2.step()
    enc1.eval()
    dec2.eval()
    with torch.no_grad():
        x1 = torch.randn(2, 3, 32, 40)
        c_code_1, _ = enc1(x1)
        for _ in range(2):
            dec2(c_code_1, torch.randn(2, 4, 1, 1))
    repr(dec1)  # AdaptiveInstanceNorm2d.__repr__


def _unit(ns: dict[str, Any]) -> None:
    # unit.py: encoders sharing their last residual block, generators sharing their first,
    # the KL term on mu, reconstruction, translation and cycle losses; PatchGAN discriminators.
    np.random.seed(0)
    dim, n_downsample = 8, 2
    shared_dim = dim * 2**n_downsample
    shared_e = ns["ResidualBlock"](features=shared_dim)
    e1 = ns["Encoder"](dim=dim, n_downsample=n_downsample, shared_block=shared_e)
    e2 = ns["Encoder"](dim=dim, n_downsample=n_downsample, shared_block=shared_e)
    shared_g = ns["ResidualBlock"](features=shared_dim)
    g1 = ns["Generator"](dim=dim, n_upsample=n_downsample, shared_block=shared_g)
    g2 = ns["Generator"](dim=dim, n_upsample=n_downsample, shared_block=shared_g)
    for m in (e1, e2, g1, g2):
        m.apply(ns["weights_init_normal"])
    optimizer_g = _adam(e1, e2, g1, g2)
    schedule = ns["LambdaLR"](4, 0, 2)
    criterion_gan, criterion_pixel = nn.MSELoss(), nn.L1Loss()

    def kl(mu: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.pow(mu, 2))

    for batch, (h, w) in ((2, (32, 32)), (3, (48, 32))):
        d1, d2 = ns["Discriminator"]((3, h, w)), ns["Discriminator"]((3, h, w))
        d1.apply(ns["weights_init_normal"])
        d2.apply(ns["weights_init_normal"])
        optimizer_d1, optimizer_d2 = _adam(d1), _adam(d2)
        x1, x2 = torch.randn(batch, 3, h, w), torch.randn(batch, 3, h, w)
        valid = torch.ones(batch, *d1.output_shape)
        fake = torch.zeros(batch, *d1.output_shape)
        optimizer_g.zero_grad()
        mu1, z1 = e1(x1)
        mu2, z2 = e2(x2)
        recon_x1, recon_x2 = g1(z1), g2(z2)
        fake_x1, fake_x2 = g1(z2), g2(z1)
        mu1_, z1_ = e1(fake_x1)
        mu2_, z2_ = e2(fake_x2)
        cycle_x1, cycle_x2 = g1(z2_), g2(z1_)
        loss_g = (
            10 * criterion_gan(d1(fake_x1), valid)
            + 10 * criterion_gan(d2(fake_x2), valid)
            + 0.1 * (kl(mu1) + kl(mu2) + kl(mu1_) + kl(mu2_))
            + 100 * (criterion_pixel(recon_x1, x1) + criterion_pixel(recon_x2, x2))
            + 100 * (criterion_pixel(cycle_x1, x1) + criterion_pixel(cycle_x2, x2))
        )
        loss_g.backward()
        optimizer_g.step()
        for d, opt, real, gen in ((d1, optimizer_d1, x1, fake_x1), (d2, optimizer_d2, x2, fake_x2)):
            opt.zero_grad()
            loss_d = criterion_gan(d(real), valid) + criterion_gan(d(gen.detach()), fake)
            loss_d.backward()
            opt.step()
        schedule.step(1)
    e1.eval()
    g2.eval()
    with torch.no_grad():
        _, z1 = e1(torch.randn(2, 3, 40, 24))
        g2(z1)


def _ccgan(ns: dict[str, Any]) -> None:
    # ccgan.py: a masked image and a 4x downsampled low-resolution copy into the U-Net,
    # MSE adversarial loss against the PatchGAN's (1, h / 8, w / 8) targets.
    input_shape = (3, 64, 64)
    generator = ns["Generator"](input_shape)
    discriminator = ns["Discriminator"](input_shape)
    optimizer_g, optimizer_d = _adam(generator), _adam(discriminator)
    adversarial_loss = nn.MSELoss()
    for batch, (h, w) in ((2, (64, 64)), (3, (64, 128))):
        imgs = torch.randn(batch, 3, h, w)
        imgs_lr = nn.functional.interpolate(imgs, scale_factor=0.25)
        masked = imgs.clone()
        masked[:, :, h // 4 : h // 2, w // 4 : w // 2] = 0
        valid = torch.ones(batch, 1, h // 8, w // 8)
        fake = torch.zeros(batch, 1, h // 8, w // 8)
        optimizer_g.zero_grad()
        gen_imgs = generator(masked, imgs_lr)
        g_loss = adversarial_loss(discriminator(gen_imgs), valid)
        g_loss.backward()
        optimizer_g.step()
        optimizer_d.zero_grad()
        real_loss = adversarial_loss(discriminator(imgs), valid)
        fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
        (0.5 * (real_loss + fake_loss)).backward()
        optimizer_d.step()
    generator.eval()
    with torch.no_grad():
        imgs = torch.randn(4, 3, 64, 64)
        generator(imgs, nn.functional.interpolate(imgs, scale_factor=0.25))


def _stargan(ns: dict[str, Any]) -> None:
    # stargan.py: WGAN-GP critic with a domain-classification head, the generator conditioned
    # on sampled attribute vectors, cycle reconstruction; n_critic discriminator steps per
    # generator step.
    np.random.seed(0)
    c_dim, img_shape = 3, (3, 32, 32)
    generator = ns["GeneratorResNet"](img_shape=img_shape, res_blocks=2, c_dim=c_dim)
    discriminator = ns["Discriminator"](img_shape=img_shape, c_dim=c_dim, n_strided=3)
    generator.apply(ns["weights_init_normal"])
    discriminator.apply(ns["weights_init_normal"])
    optimizer_g, optimizer_d = _adam(generator), _adam(discriminator)
    criterion_cycle = nn.L1Loss()

    def criterion_cls(logit: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(logit, target, reduction="sum") / logit.size(0)

    def gradient_penalty(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        alpha = torch.rand(real.size(0), 1, 1, 1)
        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        d_interpolates, _ = discriminator(interpolates)
        gradients = torch.autograd.grad(
            outputs=d_interpolates,
            inputs=interpolates,
            grad_outputs=torch.ones_like(d_interpolates),
            create_graph=True,
            retain_graph=True,
        )[0]
        return ((gradients.view(gradients.size(0), -1).norm(2, dim=1) - 1) ** 2).mean()

    for i, batch in enumerate((2, 3, 2, 4)):
        imgs = torch.randn(batch, *img_shape)
        labels = torch.randint(0, 2, (batch, c_dim)).float()
        sampled_c = torch.randint(0, 2, (batch, c_dim)).float()
        fake_imgs = generator(imgs, sampled_c)
        optimizer_d.zero_grad()
        real_validity, pred_cls = discriminator(imgs)
        fake_validity, _ = discriminator(fake_imgs.detach())
        gp = gradient_penalty(imgs.data, fake_imgs.data)
        loss_d = -torch.mean(real_validity) + torch.mean(fake_validity) + 10 * gp + criterion_cls(pred_cls, labels)
        loss_d.backward()
        optimizer_d.step()
        optimizer_g.zero_grad()
        if i % 2 == 0:
            gen_imgs = generator(imgs, sampled_c)
            recov_imgs = generator(gen_imgs, labels)
            fake_validity, pred_cls = discriminator(gen_imgs)
            loss_g = -torch.mean(fake_validity) + criterion_cls(pred_cls, sampled_c) + 10 * criterion_cycle(recov_imgs, imgs)
            loss_g.backward()
            optimizer_g.step()
    generator.eval()
    with torch.no_grad():
        # sample_images(): every image translated to each single attribute
        imgs = torch.randn(2, *img_shape)
        for k in range(c_dim):
            labels = torch.zeros(2, c_dim)
            labels[:, k] = 1
            generator(imgs, labels)


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "gan_munit_models": _munit,
    "gan_unit_models": _unit,
    "gan_ccgan_models": _ccgan,
    "gan_stargan_models": _stargan,
}
