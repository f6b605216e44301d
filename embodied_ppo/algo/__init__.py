"""The algorithm, as functions of tensors: advantages, losses, KL, minibatch order, batch
preparation, the update and its compiled gradient step."""
