"""One turn of the assistant: route inbound, build the prompt, run the model and its tools."""
