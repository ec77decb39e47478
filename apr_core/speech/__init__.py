"""Speech to text with Whisper in numpy: audio front end (`audio`, `mel`), the model
(`model`, `whisper_net`), decoding (`decoding`, `beam`, `timestamps`) and the
30-second-window transcription loop (`transcribe`). Pure Python + numpy, so the browser
(Pyodide) runs the same code as the CLI and the server."""
