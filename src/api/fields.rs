//! A submission's fields made into the request the queue takes: its preset filled in, its owner's webhook
//! where it gives none, then read and checked by the queue, as for `vaebox run`.
use super::error::ApiError;
use super::params::JobFields;
use crate::config::Config;
use crate::queue::{self, JobRequest};

/// Reads and checks the fields: the request the queue will take. `owner`, the token that submits: its
/// `callback_url` is the job's when neither the job nor its preset gives one.
pub fn job_request(fields: &JobFields, config: &Config, owner: Option<&str>) -> Result<JobRequest, ApiError> {
    let mut fields = fields.with_preset(&config.presets)?;
    let token = config.tokens.iter().find(|token| Some(token.name.as_str()) == owner);
    if fields.get("callback_url").is_none() {
        if let Some(url) = token.and_then(|token| token.callback_url.clone()) {
            fields = fields.with("callback_url", url);
        }
    }
    let request = queue::check(&queue::parameters::read(&fields, &config.models_dir)?, config)?;
    // Owners take turns, but priority goes before turns: the admin bounds each token's.
    if let Some(max) = token.filter(|token| !token.admin).and_then(|token| token.max_priority) {
        if request.priority > max {
            let message = format!("priority {} is over this token's max_priority {max} (set by the box's admin)", request.priority);
            return Err(ApiError::bad_request(crate::error_codes::PRIORITY_OVER_LIMIT, message));
        }
    }
    Ok(request)
}
