//! Per-model prices, for the cost shown with usage. `MAKA_PRICES` (JSON), else the config
//! file's `prices` key: `{"currency": "USD", "models": {"gpt-4o-mini": {"input": 0.15,
//! "output": 0.6, "cachedInput": 0.075}}}` — amounts per million tokens. Without prices no cost
//! is reported (never a guessed one).

use crate::host_api::wire::TokenUsage;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    pub input: f64,
    pub output: f64,
    /// For cached input tokens; defaults to `input`.
    #[serde(default)]
    pub cached_input: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Prices {
    #[serde(default = "usd")]
    pub currency: String,
    #[serde(default)]
    pub models: HashMap<String, ModelPrice>,
}

fn usd() -> String {
    "USD".into()
}

impl Prices {
    /// From `MAKA_PRICES`, else the config file; a malformed value is logged and ignored.
    pub fn load(config_file: &serde_json::Map<String, Value>) -> Prices {
        let raw = match std::env::var("MAKA_PRICES")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            Some(text) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => v,
                Err(e) => {
                    log::error!("MAKA_PRICES is not JSON ({e}); no costs will be shown");
                    return Prices::default();
                }
            },
            None => match config_file.get("prices") {
                Some(v) => v.clone(),
                None => return Prices::default(),
            },
        };
        match serde_json::from_value::<Prices>(raw) {
            Ok(p) if p.models.values().all(|m| m.input >= 0.0 && m.output >= 0.0) => p,
            Ok(_) => {
                log::error!("prices: amounts must not be negative; no costs will be shown");
                Prices::default()
            }
            Err(e) => {
                log::error!("prices: {e}; expected {{\"currency\", \"models\": {{id: {{input, output, cachedInput?}}}}}}; no costs will be shown");
                Prices::default()
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// What `usage` cost on `model`; `None` when the model has no price.
    pub fn cost(&self, model: &str, usage: &TokenUsage) -> Option<f64> {
        let p = self.models.get(model)?;
        let cached = usage.cached_tokens.min(usage.input_tokens);
        let fresh = usage.input_tokens - cached;
        Some(
            (fresh as f64 * p.input
                + cached as f64 * p.cached_input.unwrap_or(p.input)
                + usage.output_tokens as f64 * p.output)
                / 1_000_000.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_per_million_tokens_with_cached_input_cheaper() {
        let p: Prices = serde_json::from_value(serde_json::json!({
            "models": {"m": {"input": 2.0, "output": 8.0, "cachedInput": 0.5}}
        }))
        .unwrap();
        assert_eq!(p.currency, "USD");
        let u = TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            reasoning_tokens: 0,
            cached_tokens: 400_000,
        };
        let c = p.cost("m", &u).unwrap();
        assert!(
            (c - (0.6 * 2.0 + 0.4 * 0.5 + 0.5 * 8.0)).abs() < 1e-9,
            "{c}"
        );
        assert_eq!(p.cost("other", &u), None);
    }
}
