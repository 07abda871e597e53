"""Pure rules: from a TFJob's spec to its children (names, TF_CONFIG, Services, StatefulSets,
PodGroup, TensorBoard) and from what is observed of its pods to its status. Plain data in,
plain data out; imports neither kopf nor the Kubernetes client."""
