//! The optimizers' and the scheduler's options.

use crate::error::{check, Result};
use crate::sys;
use super::enums::Schedule;

/// `accel_sgd_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SgdOptions {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
}

impl Default for SgdOptions {
    /// `ACCEL_SGD_OPTIONS_INIT`
    fn default() -> SgdOptions {
        SgdOptions { lr: 0.01, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false }
    }
}

impl SgdOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_sgd_options> {
        let mut o = sys::ACCEL_SGD_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_sgd_options_init(&mut o, sys::ACCEL_SGD_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.momentum = self.momentum;
        o.dampening = self.dampening;
        o.weight_decay = self.weight_decay;
        o.nesterov = self.nesterov as i32;
        Ok(o)
    }
}

setters!(SgdOptions {
    with_lr lr: f64,
    with_momentum momentum: f64,
    with_dampening dampening: f64,
    with_weight_decay weight_decay: f64,
    with_nesterov nesterov: bool,
});

/// `accel_adamw_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdamWOptions {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWOptions {
    /// `ACCEL_ADAMW_OPTIONS_INIT`
    fn default() -> AdamWOptions {
        AdamWOptions { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
    }
}

impl AdamWOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_adamw_options> {
        let mut o = sys::ACCEL_ADAMW_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_adamw_options_init(&mut o, sys::ACCEL_ADAMW_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.beta1 = self.beta1;
        o.beta2 = self.beta2;
        o.eps = self.eps;
        o.weight_decay = self.weight_decay;
        Ok(o)
    }
}

setters!(AdamWOptions {
    with_lr lr: f64,
    with_beta1 beta1: f64,
    with_beta2 beta2: f64,
    with_eps eps: f64,
    with_weight_decay weight_decay: f64,
});

/// `accel_lamb_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LambOptions {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for LambOptions {
    /// `ACCEL_LAMB_OPTIONS_INIT`
    fn default() -> LambOptions {
        LambOptions { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.01 }
    }
}

impl LambOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_lamb_options> {
        let mut o = sys::ACCEL_LAMB_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_lamb_options_init(&mut o, sys::ACCEL_LAMB_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.beta1 = self.beta1;
        o.beta2 = self.beta2;
        o.eps = self.eps;
        o.weight_decay = self.weight_decay;
        Ok(o)
    }
}

setters!(LambOptions {
    with_lr lr: f64,
    with_beta1 beta1: f64,
    with_beta2 beta2: f64,
    with_eps eps: f64,
    with_weight_decay weight_decay: f64,
});

/// `accel_adafactor_options` (transformers' Adafactor defaults; `beta1` 0 is no first moment,
/// `lr` 0 with `relative_step`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdafactorOptions {
    pub lr: f64,
    pub eps1: f64,
    pub eps2: f64,
    pub clip_threshold: f64,
    pub decay_rate: f64,
    pub beta1: f64,
    pub weight_decay: f64,
    pub scale_parameter: bool,
    pub relative_step: bool,
    pub warmup_init: bool,
}

impl Default for AdafactorOptions {
    /// `ACCEL_ADAFACTOR_OPTIONS_INIT`
    fn default() -> AdafactorOptions {
        AdafactorOptions {
            lr: 0.0,
            eps1: 1e-30,
            eps2: 1e-3,
            clip_threshold: 1.0,
            decay_rate: -0.8,
            beta1: 0.0,
            weight_decay: 0.0,
            scale_parameter: true,
            relative_step: true,
            warmup_init: false,
        }
    }
}

impl AdafactorOptions {
    /// The raw struct: the library's defaults of this version, then every field.
    pub fn to_sys(&self) -> Result<sys::accel_adafactor_options> {
        let mut o = sys::ACCEL_ADAFACTOR_OPTIONS_INIT;
        // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
        check(unsafe { sys::accel_adafactor_options_init(&mut o, sys::ACCEL_ADAFACTOR_OPTIONS_VERSION) }, std::ptr::null())?;
        o.lr = self.lr;
        o.eps1 = self.eps1;
        o.eps2 = self.eps2;
        o.clip_threshold = self.clip_threshold;
        o.decay_rate = self.decay_rate;
        o.beta1 = self.beta1;
        o.weight_decay = self.weight_decay;
        o.scale_parameter = self.scale_parameter as i32;
        o.relative_step = self.relative_step as i32;
        o.warmup_init = self.warmup_init as i32;
        Ok(o)
    }
}

setters!(AdafactorOptions {
    with_lr lr: f64,
    with_eps1 eps1: f64,
    with_eps2 eps2: f64,
    with_clip_threshold clip_threshold: f64,
    with_decay_rate decay_rate: f64,
    with_beta1 beta1: f64,
    with_weight_decay weight_decay: f64,
    with_scale_parameter scale_parameter: bool,
    with_relative_step relative_step: bool,
    with_warmup_init warmup_init: bool,
});

/// `accel_scheduler_options`
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SchedulerOptions {
    pub kind: Schedule,
    pub warmup_steps: i64,
    pub total_steps: i64,
    pub min_lr_ratio: f64,
}

impl Default for SchedulerOptions {
    /// `ACCEL_SCHEDULER_OPTIONS_INIT`
    fn default() -> SchedulerOptions {
        SchedulerOptions { kind: Schedule::Constant, warmup_steps: 0, total_steps: 0, min_lr_ratio: 0.0 }
    }
}

impl SchedulerOptions {
    /// The raw struct: the library's defaults of this version (`accel_*_options_init`), then every field.
    pub fn to_sys(&self) -> Result<sys::accel_scheduler_options> {
        let mut o = sys::ACCEL_SCHEDULER_OPTIONS_INIT;
        check(
            // SAFETY: `o` is a writable struct of this version (the init writes only that version's bytes).
            unsafe { sys::accel_scheduler_options_init(&mut o, sys::ACCEL_SCHEDULER_OPTIONS_VERSION) },
            std::ptr::null(),
        )?;
        o.kind = self.kind.to_raw();
        o.warmup_steps = self.warmup_steps;
        o.total_steps = self.total_steps;
        o.min_lr_ratio = self.min_lr_ratio;
        Ok(o)
    }
}

setters!(SchedulerOptions {
    with_kind kind: Schedule,
    with_warmup_steps warmup_steps: i64,
    with_total_steps total_steps: i64,
    with_min_lr_ratio min_lr_ratio: f64,
});
