//! `include/accel/accel.h`: Models, and losses.

use std::os::raw::{c_char, c_int};

use crate::{accel_context, accel_model, accel_status, accel_tensor};

// ---- Models ------------------------------------------------------------------------

pub type accel_activation = c_int;
pub const ACCEL_ACT_RELU: accel_activation = 0;
pub const ACCEL_ACT_GELU: accel_activation = 1;
pub const ACCEL_ACT_TANH: accel_activation = 2;
pub const ACCEL_ACT_SIGMOID: accel_activation = 3;

pub const ACCEL_MLP_OPTIONS_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct accel_mlp_options {
    pub version: u32,
    pub layer_sizes: *const i64,
    pub num_layer_sizes: usize,
    pub activation: accel_activation,
    pub dropout: f64,
    pub bias: i32,
}

/// `ACCEL_MLP_OPTIONS_INIT`
pub const ACCEL_MLP_OPTIONS_INIT: accel_mlp_options = accel_mlp_options {
    version: ACCEL_MLP_OPTIONS_VERSION,
    layer_sizes: std::ptr::null(),
    num_layer_sizes: 0,
    activation: ACCEL_ACT_RELU,
    dropout: 0.0,
    bias: 1,
};

extern "C" {
    pub fn accel_mlp_options_init(opts: *mut accel_mlp_options, version: u32) -> accel_status;
    pub fn accel_model_create_mlp(
        ctx: *mut accel_context,
        opts: *const accel_mlp_options,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_model_load_torchscript(
        ctx: *mut accel_context,
        path: *const c_char,
        out: *mut *mut accel_model,
    ) -> accel_status;
    pub fn accel_model_destroy(model: *mut accel_model);
    pub fn accel_model_forward(
        ctx: *mut accel_context,
        model: *mut accel_model,
        inputs: *const *mut accel_tensor,
        num_inputs: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_model_set_training(ctx: *mut accel_context, model: *mut accel_model, training: c_int) -> accel_status;
    pub fn accel_model_num_parameters(
        model: *const accel_model,
        out_tensors: *mut usize,
        out_elements: *mut i64,
    ) -> accel_status;
    pub fn accel_model_parameter_name(model: *const accel_model, index: usize, out: *mut *const c_char) -> accel_status;
    pub fn accel_model_parameter(
        ctx: *mut accel_context,
        model: *const accel_model,
        index: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_model_parameter_grad(
        ctx: *mut accel_context,
        model: *const accel_model,
        index: usize,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_save_model(ctx: *mut accel_context, model: *const accel_model, path: *const c_char) -> accel_status;

    pub fn accel_loss_cross_entropy(
        ctx: *mut accel_context,
        logits: *const accel_tensor,
        targets: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
    pub fn accel_loss_mse(
        ctx: *mut accel_context,
        input: *const accel_tensor,
        target: *const accel_tensor,
        out: *mut *mut accel_tensor,
    ) -> accel_status;
}
