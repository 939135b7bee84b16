"""The one-board deploy flow: a build's facts, run settings, the remote layout, push, the pinned job,
collect, the cells and the verdict; `Deployment` composes them."""
