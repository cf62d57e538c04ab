//! A try's whole clip, made on the server (`POST /v1/jobs/{id}/whole`): a new job over the input of a job
//! that ran over part of it (a range), with the same op, model, settings, priority and webhook and no range,
//! so that nobody has to hold the file or send it again. The new job's input is a hard link to the try's (a
//! copy where the file system has none): each job owns its own name for the file, so deleting either job,
//! or retention removing it, leaves the other's input in place, and the bytes go with the last job that
//! names them.
use std::io::ErrorKind;

use uuid::Uuid;

use super::admission::Ticket;
use super::device_need::{device_bytes_needed, NeedOf};
use super::inspect::InputKind;
use super::submit::Origin;
use super::{callbacks, find_model, JobRequest, Queue, QueueError, StagedFile};
use crate::error_codes as codes;
use crate::jobs::blobs::BlobError;
use crate::jobs::{Job, JobParams};

/// What asking for a try's whole clip did.
pub enum Whole {
    /// A new job, queued.
    Queued(Job),
    /// The whole-clip job made before, still queued or running, or done: nothing new was queued.
    Already(Job),
}

impl Queue {
    /// Queues the whole clip of `tried` for `owner`, in the place `ticket` holds. The try may be queued,
    /// running or ended: what it needs is a range and its input. The whole clip is checked as an upload
    /// would be (the box's limits on frames and size hold for all of it).
    /// A whole clip asked for again while one is queued, running or done is that one (`Whole::Already`).
    pub async fn submit_whole(&self, tried: &Job, owner: Option<String>, ticket: Ticket) -> Result<Whole, QueueError> {
        if tried.params.range.is_none() {
            let why = format!(
                "job {} ran over its whole input (no start, start_frame, frames or duration): there is no more of it to run",
                tried.id
            );
            return Err(QueueError::refused(codes::JOB_HAS_NO_RANGE, why));
        }
        if let Some(already) = self.store.whole_of(tried.id).await? {
            return Ok(Whole::Already(already));
        }
        let request = self.whole_request(tried)?;
        let input = self.link_input_of(tried).await?;
        let origin = Origin { owner, answered_by: None, from_try: Some(tried.id) };
        Ok(Whole::Queued(self.check_and_enqueue(Uuid::new_v4(), request, input, InputKind::File, origin, ticket).await?))
    }

    /// The try's request without its range, checked against what the box has now (a model taken away since
    /// is refused as at submission; a webhook against today's callback settings).
    fn whole_request(&self, tried: &Job) -> Result<JobRequest, QueueError> {
        let models_dir = self.config.models_dir.as_path();
        let entry = find_model(models_dir, tried.op, &tried.model)?;
        // Everything the try resolved at its submission (scale, output format, restore and interpolate
        // settings) stays as it was: the whole clip is what the try showed, longer.
        let params = JobParams { range: None, ..tried.params.clone() };
        let callback_url = tried.callback.as_ref().map(|callback| callbacks::check_url(&callback.url, &self.config)).transpose()?;
        let need = NeedOf { models_dir, entry: &entry, op: tried.op, params: &params, block_swap: self.config.dit_block_swap };
        Ok(JobRequest {
            device_bytes_needed: device_bytes_needed(need),
            op: tried.op,
            family: entry.family,
            latent_channels: entry.latent_channels,
            vae_factors: entry.vae_factors,
            model: entry.name,
            priority: tried.priority,
            callback_url,
            // The format the try was given or defaulted to is the job's own now.
            output_format_given: true,
            params,
        })
    }

    /// The try's input under a new name in the uploads folder, as an upload would be staged; `input-gone`
    /// when the try's files were removed (a synchronous call's, or by hand).
    async fn link_input_of(&self, tried: &Job) -> Result<StagedFile, QueueError> {
        let gone = || QueueError::InputGone(tried.id.to_string());
        let source = self.files.ensure_local(tried.id, &tried.input_path).await.map_err(|e| match e {
            BlobError::NotFound(_) => gone(),
            other => QueueError::Storage(other.to_string()),
        })?;
        let uploads = self.config.data_dir.join("uploads");
        tokio::fs::create_dir_all(&uploads).await?;
        let mut staged = StagedFile::new(uploads.join(format!("{}.part", Uuid::new_v4())), tried.input.file_name.clone());
        let linked = match tokio::fs::hard_link(&source, &staged.path).await {
            // Another file system, or one without links: a copy.
            Err(e) if e.kind() != ErrorKind::NotFound => tokio::fs::copy(&source, &staged.path).await.map(|_| ()),
            linked => linked,
        };
        match linked {
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(gone()),
            other => other?,
        }
        staged.bytes = tried.input.bytes;
        Ok(staged)
    }
}
