"""`nmt distill`: a big teacher distilled into a small student on one machine (sequence-level knowledge distillation,
Kim & Rush 2016): clean the corpus with evidence (filters), translate it with the teacher (teacher), train the
student on the teacher's output with nmt's own prepare and train, fine-tune it for int8 (stages; nmt.train.fakequant),
score both (stages), export the student as CTranslate2/Argos/Hugging Face packages through `nmt export` (packages),
each stage resumable in one pipeline dir (state, pipeline). A room of its own: it drives data, train, translation and
export, and none of them knows of it."""
