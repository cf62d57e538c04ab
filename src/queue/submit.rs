//! Submission: a place in the queue (`admit`, before any of the input is read), then the input's checks
//! and the job's row (`submit`). HTTP uploads and the remote-VAE endpoints go through both; `vaebox run`
//! shares the checks (`request::check`, `inspect::inspect_input`) without a queue.
use uuid::Uuid;

use super::admission::{Limits, Ticket};
use super::inspect::{inspect_input, InputKind, Probed};
use super::{JobRequest, Queue, QueueError, StagedFile};
use crate::jobs::{Job, NewJob};

/// A checked request with its received input, and the place in the queue admitted for it.
pub struct Submission {
    pub request: JobRequest,
    pub input: StagedFile,
    pub kind: InputKind,
    pub owner: Option<String>,
    pub ticket: Ticket,
}

/// Who a job is for and what made it.
pub(super) struct Origin {
    pub owner: Option<String>,
    /// The box whose open connection waits for the result (a synchronous call); none for an ordinary job.
    pub answered_by: Option<String>,
    /// The short try a whole-clip job was made from.
    pub from_try: Option<Uuid>,
}

impl Queue {
    /// A place in the queue (see `admission`), held until the job is queued or the upload fails.
    /// Refused before the body is read when the data dir's disk is below `min_free_disk_mib`.
    pub async fn admit(&self, owner: Option<String>) -> Result<Ticket, QueueError> {
        let min_free = self.config.min_free_disk_mib.saturating_mul(1 << 20);
        if crate::jobs::disk::free_bytes(&self.config.data_dir).is_some_and(|free| free < min_free) {
            return Err(QueueError::InsufficientStorage);
        }
        let limits = Limits { queued: self.config.max_queued_jobs, queued_per_token: self.config.max_queued_jobs_per_token };
        self.admission.admit(self.store.as_ref(), owner, &limits).await
    }

    /// Checks the input, then queues the job; its place in the queue is given back once the row exists.
    pub async fn submit(&self, submission: Submission) -> Result<Job, QueueError> {
        self.submit_as(submission, Uuid::new_v4()).await
    }

    /// As `submit`, under an id the caller chose and recorded first (a watch folder's file), so that after a
    /// restart it can tell whether the job exists.
    pub async fn submit_as(&self, submission: Submission, id: Uuid) -> Result<Job, QueueError> {
        let Submission { request, input, kind, owner, ticket } = submission;
        // A synchronous call is answered on this box's connection, and nowhere else.
        let answered_by = (kind == InputKind::Tensor).then(|| self.config.worker_name());
        let origin = Origin { owner, answered_by, from_try: None };
        self.check_and_enqueue(id, request, input, kind, origin, ticket).await
    }

    /// The input's checks, then the job's row; its place in the queue is given back once the row exists.
    pub(super) async fn check_and_enqueue(
        &self,
        id: Uuid,
        mut request: JobRequest,
        input: StagedFile,
        kind: InputKind,
        origin: Origin,
        ticket: Ticket,
    ) -> Result<Job, QueueError> {
        if let Some(url) = &request.callback_url {
            super::callbacks::refuse_own_api(url, self.store.as_ref()).await?;
        }
        let probed = inspect_input(&self.config, &mut request, &input.path, kind).await?;
        self.refuse_if_no_worker_fits(&request).await?;
        let job = self.enqueue(id, input, request, probed, origin).await?;
        drop(ticket);
        Ok(job)
    }

    /// A job no worker heard of can hold would wait for ever: refused while every one is too small (a worker
    /// with no limit, or none heard of yet, takes it).
    async fn refuse_if_no_worker_fits(&self, request: &JobRequest) -> Result<(), QueueError> {
        let workers = self.store.workers(self.config.lease() * 3).await?;
        let offers: Option<Vec<u64>> = workers.iter().map(|worker| worker.device_memory_bytes).collect();
        let largest = match offers.and_then(|offers| offers.into_iter().max()) {
            Some(largest) if largest < request.device_bytes_needed => largest,
            _ => return Ok(()),
        };
        let mib = |bytes: u64| bytes.div_ceil(1 << 20);
        Err(QueueError::NoWorkerFits(format!(
            "the job needs {} MiB of device memory (the model's weights plus memory_budget_mib); the largest worker offers {} MiB",
            mib(request.device_bytes_needed),
            mib(largest)
        )))
    }

    /// Moves a checked input into its job folder and queues the job; the folder goes if the row cannot be written.
    async fn enqueue(
        &self,
        id: Uuid,
        file: StagedFile,
        request: JobRequest,
        probed: Probed,
        origin: Origin,
    ) -> Result<Job, QueueError> {
        let job_dir = self.job_dir(id);
        tokio::fs::create_dir_all(&job_dir).await?;
        let extension = std::path::Path::new(&file.file_name)
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_else(|| "mp4".into());
        let input_path = job_dir.join(format!("input.{extension}"));
        let (file_name, bytes) = (file.file_name.clone(), file.bytes);
        let estimate = match probed.size.as_ref().and_then(|size| super::estimate::Planned::of(&request, size, bytes)) {
            Some(planned) => Some(self.estimate(&request, &planned).await),
            None => None,
        };
        file.keep_as(&input_path).await?;
        if let Err(e) = self.files.share(id, &input_path).await {
            let _ = tokio::fs::remove_dir_all(&job_dir).await;
            tracing::error!(%id, error = %e, "cannot put an upload into the shared storage; it was refused");
            return Err(QueueError::Storage(e.to_string()));
        }
        let new_job = NewJob {
            id,
            op: request.op,
            model: request.model,
            priority: request.priority,
            params: request.params,
            input_name: file_name,
            input_path: input_path.to_string_lossy().into_owned(),
            input_bytes: bytes,
            input_media: probed.media,
            probe_s: probed.seconds,
            owner: origin.owner,
            device_bytes_needed: request.device_bytes_needed,
            answered_by: origin.answered_by,
            callback_url: request.callback_url,
            from_try: origin.from_try,
            estimate,
        };
        let job = match self.store.insert(new_job).await {
            Ok(job) => job,
            Err(e) => {
                self.files.remove(id).await;
                return Err(e.into());
            }
        };
        crate::jobs::telemetry::job_created(job.op, origin.from_try.is_none().then_some(bytes));
        self.wake.notify_one();
        let _ = self.events.send(id);
        tracing::info!(%id, op = job.op.as_str(), model = %job.model, bytes, "job queued");
        Ok(job)
    }
}
