//! Histogram matching of one channel by rank, shared by the Lab and HSV fixes.
use tch::{Kind, Tensor};

use crate::models::ModelError;

/// Each value of `source` (1-D) replaced by the reference value of the same rank: the k-th smallest
/// becomes the k-th smallest of `reference` (1-D) when the counts are equal, else
/// `sorted_ref[trunc(q_k (n_ref − 1))]` with q = float32 `linspace(0, 1, n_source)`, as the ComfyUI
/// front-end does. Equal source values are ranked by position (a stable sort): the front-end's sort is
/// not stable, so its ranks among exact ties are arbitrary; a stable one gives the same answer on every
/// device and thread count.
pub fn match_histogram(source: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    let (n_source, n_reference) = (source.size1()?, reference.size1()?);
    if n_source == 0 || n_reference == 0 {
        return Ok(source.shallow_clone());
    }
    let (_, order) = source.f_sort_stable(true, 0, false)?;
    let (sorted_reference, _) = reference.f_sort_stable(true, 0, false)?;
    let matched = if n_source == n_reference {
        sorted_reference
    } else {
        let quantiles = Tensor::f_linspace(0.0, 1.0, n_source, (Kind::Float, source.device()))?;
        let at = quantiles.f_mul_scalar((n_reference - 1) as f64)?.f_to_kind(Kind::Int64)?;
        sorted_reference.f_index_select(0, &at)?
    };
    Ok(source.f_empty_like()?.f_index_copy(0, &order, &matched)?)
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;

    fn values(v: &[f32]) -> Tensor {
        Tensor::from_slice(v)
    }

    fn as_vec(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t).unwrap()
    }

    #[test]
    fn equal_counts_take_the_reference_value_of_the_same_rank() {
        let out = match_histogram(&values(&[0.3, 0.1, 0.2]), &values(&[5.0, 7.0, 6.0])).unwrap();
        assert_eq!(as_vec(&out), [7.0, 5.0, 6.0]);
    }

    #[test]
    fn ties_are_ranked_by_position() {
        let out = match_histogram(&values(&[0.5, 0.5, 0.5, 0.1]), &values(&[4.0, 3.0, 2.0, 1.0])).unwrap();
        assert_eq!(as_vec(&out), [2.0, 3.0, 4.0, 1.0]);
    }

    /// Five source values against three reference values: q = 0, 0.25, 0.5, 0.75, 1 → indices
    /// trunc(2q) = 0, 0, 1, 1, 2.
    #[test]
    fn unequal_counts_pick_by_truncated_quantile() {
        let out = match_histogram(&values(&[0.9, 0.1, 0.5, 0.3, 0.7]), &values(&[30.0, 10.0, 20.0])).unwrap();
        assert_eq!(as_vec(&out), [30.0, 10.0, 20.0, 10.0, 20.0]);
    }

    #[test]
    fn the_matched_values_are_the_references_distribution() {
        tch::manual_seed(11);
        let source = Tensor::rand([1000], (Kind::Float, Device::Cpu));
        let reference = Tensor::randn([1000], (Kind::Float, Device::Cpu)) * 3.0;
        let out = match_histogram(&source, &reference).unwrap();
        let (sorted_out, _) = out.sort(0, false);
        let (sorted_ref, _) = reference.sort(0, false);
        assert_eq!(sorted_out, sorted_ref);
    }
}
