using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace LockingCenter.Tests
{
    /// <summary>A small JSON reader for the tests: objects become Dictionary, arrays List, numbers double.</summary>
    internal sealed class Json
    {
        private readonly string _s;
        private int _i;

        private Json(string s) { _s = s; }

        public static object Parse(string text)
        {
            var j = new Json(text);
            object v = j.Value();
            j.Ws();
            if (j._i != j._s.Length) throw j.Error("trailing data");
            return v;
        }

        private object Value()
        {
            Ws();
            if (_i >= _s.Length) throw Error("unexpected end");
            char c = _s[_i];
            switch (c)
            {
                case '{': return Obj();
                case '[': return Arr();
                case '"': return Str();
                case 't': return Literal("true", true);
                case 'f': return Literal("false", false);
                case 'n': return Literal("null", null);
                default: return Num();
            }
        }

        private Dictionary<string, object> Obj()
        {
            var m = new Dictionary<string, object>();
            _i++;
            Ws();
            if (Peek() == '}') { _i++; return m; }
            while (true)
            {
                Ws();
                string k = Str();
                Ws();
                Expect(':');
                m[k] = Value();
                Ws();
                char c = _s[_i++];
                if (c == '}') return m;
                if (c != ',') throw Error("expected , or }");
            }
        }

        private List<object> Arr()
        {
            var l = new List<object>();
            _i++;
            Ws();
            if (Peek() == ']') { _i++; return l; }
            while (true)
            {
                l.Add(Value());
                Ws();
                char c = _s[_i++];
                if (c == ']') return l;
                if (c != ',') throw Error("expected , or ]");
            }
        }

        private string Str()
        {
            Expect('"');
            var b = new StringBuilder();
            while (true)
            {
                char c = _s[_i++];
                if (c == '"') return b.ToString();
                if (c != '\\') { b.Append(c); continue; }
                char e = _s[_i++];
                switch (e)
                {
                    case 'n': b.Append('\n'); break;
                    case 't': b.Append('\t'); break;
                    case 'r': b.Append('\r'); break;
                    case 'b': b.Append('\b'); break;
                    case 'f': b.Append('\f'); break;
                    case 'u':
                        b.Append((char)int.Parse(_s.Substring(_i, 4), NumberStyles.HexNumber, CultureInfo.InvariantCulture));
                        _i += 4;
                        break;
                    default: b.Append(e); break;
                }
            }
        }

        private object Num()
        {
            int start = _i;
            while (_i < _s.Length && "+-0123456789.eE".IndexOf(_s[_i]) >= 0) _i++;
            if (start == _i) throw Error("unexpected character");
            return double.Parse(_s.Substring(start, _i - start), CultureInfo.InvariantCulture);
        }

        private object Literal(string word, object v)
        {
            if (string.CompareOrdinal(_s, _i, word, 0, word.Length) != 0) throw Error("bad literal");
            _i += word.Length;
            return v;
        }

        private void Ws()
        {
            while (_i < _s.Length && char.IsWhiteSpace(_s[_i])) _i++;
        }

        private char Peek() { return _i < _s.Length ? _s[_i] : '\0'; }

        private void Expect(char c)
        {
            if (Peek() != c) throw Error("expected " + c);
            _i++;
        }

        private FormatException Error(string what)
        {
            return new FormatException("JSON: " + what + " at offset " + _i);
        }
    }
}
