//! Reading a service's Prometheus `/metrics`.

/// The sum of the samples of `name` (with `label`, if given) on the `/metrics` page at
/// `url`; 0 when there are none (a counter appears only once it has counted).
pub async fn metric(url: &str, name: &str, label: Option<(&str, &str)>) -> f64 {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.split(['{', ' ']).next() == Some(name))
        .filter(|line| label.is_none_or(|(k, v)| line.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
