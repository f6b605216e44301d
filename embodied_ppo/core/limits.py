"""Numeric limits that the config checks and the policy module share (no imports: the light
config path and the deployable, torch-only policy both read them).

The Gaussian head's log standard deviation stays in [LOG_STD_MIN, LOG_STD_MAX]. The floor keeps
the noise alive in float32: an action is mean + std x noise, and with std below ~1e-7 x |mean|
the noise rounds away (the stored log-probability then no longer matches the action); at
exp(-5) = 0.0067 it survives for any |mean| below ~1e4. The learned log-std parameter is held
inside the range by the update (see gradient_step.GradientStep), so the forward pass's clamp
never cuts its gradient.
"""

from __future__ import annotations

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
