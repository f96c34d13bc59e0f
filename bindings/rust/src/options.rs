//! Options as Rust structs. `Default` gives the header's `ACCEL_*_OPTIONS_INIT` values; the
//! conversion to the raw struct starts from the library's `accel_*_options_init` (so a
//! field this binding does not set keeps the library's default) and then sets every field.

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident : $raw:ty { $($(#[$vm:meta])* $variant:ident = $c:path),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* #[doc = concat!("(`", stringify!($c), "`)")] $variant),+ }
        impl $name {
            /// The raw C value.
            pub fn to_raw(self) -> $raw { match self { $($name::$variant => $c),+ } }
            /// The variant for a raw C value (None for a value this binding does not know).
            pub fn from_raw(v: $raw) -> Option<$name> {
                $(if v == $c { return Some($name::$variant); })+
                None
            }
        }
    };
}

/// Builder-style setters, one per field: `fn with_FIELD(self, value) -> Self`. The options
/// structs are `#[non_exhaustive]` (the C structs grow by appending fields, and so do these):
/// outside this crate they are made from `Default` (or a constructor such as
/// [`MlpOptions::new`]) and these setters, or a `let mut` value whose fields are assigned;
/// a struct literal does not compile, so a new field breaks no one.
macro_rules! setters {
    ($name:ident { $($setter:ident $field:ident : $ty:ty $(=> |$v:ident| $conv:expr)?),+ $(,)? }) => {
        impl $name {
            $(
                #[doc = concat!("Sets `", stringify!($field), "` (builder style; the other fields are kept).")]
                #[must_use]
                #[inline]
                pub fn $setter(mut self, value: $ty) -> $name {
                    self.$field = setters!(@conv value $(, |$v| $conv)?);
                    self
                }
            )+
        }
    };
    (@conv $value:ident) => { $value };
    (@conv $value:ident, |$v:ident| $conv:expr) => { { let $v = $value; $conv } };
}

// The options by area, re-exported: `crate::options::NAME` (and `accel::NAME`) as before. The
// macros above are defined before these modules, so they can use them.
mod enums;
mod context;
mod model;
mod memory;
mod optimizer;
mod data;
mod sim;
mod tokenizer;

pub use self::enums::{Activation, Attention, Backend, ChatFormat, Device, Loss, Offload, OptimizerKind, Precision, Quantization, ReduceOp, Schedule, Side, SpecialToken, Strategy};
pub use self::context::{InferenceOptions, LogWriters, Options, ProjectOptions, TrackerOptions};
pub use self::model::{GenerateOptions, LmOptions, LoraOptions, MlpOptions};
pub use self::memory::MemoryEstimateOptions;
pub use self::optimizer::{AdafactorOptions, AdamWOptions, LambOptions, SchedulerOptions, SgdOptions};
pub use self::data::{DataLoaderOptions, LmDataOptions, SftOptions};
pub use self::sim::{RawSimOptions, SimOptions};
pub use self::tokenizer::EncodeOptions;
